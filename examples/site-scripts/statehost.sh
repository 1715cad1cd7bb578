#!/usr/bin/env bash
# A pretend two-host site kept in a state directory: the command-template driver's test
# double and a template for real site scripts (docs/site.md). Usage:
#
#   statehost.sh STATE_DIR ACTION [ARGS...]
#
# Each action reads and changes files under STATE_DIR, prints what it did, and ends with
# one `TALLY-FACTS {json}` line (the facts convention). A real site does the same with
# ssh, systemctl/docker and nvidia-smi instead of files.
#
# State:   production (up|down|draining), identity (production's identity), snapshot (sha256),
#          engine ("ARM ROLE STATUS"), engine.log, placeholders/HOST, fenced/HOST,
#          caps/ARM (an arm's clock cap; caps/default, else 2300), actions.log (what ran, in order),
#          identities/ARM.json (what a start of ARM reports about the hosts: a JSON object with any of
#          worker_identity, markov_identity, experiment_commit, worker_tree; start_arm reports it),
#          tag.HOST ("TAG COMMIT": the git tag checked out on HOST and the commit it points at,
#          reported by placeholder_proof as tag and tag_commit).
# Faults (for tests; each is used once): inject/ACTION.fail holds an exit code;
#          inject/ACTION.hang makes the action hang (with a child process) until killed;
#          inject/config_digest holds the config_digest the next start_arm reports;
#          inject/dial_back holds MHz: before the next action the clock dials back to it and
#          recovers (two THERMAL-WATCH lines in thermal.log, read by read_thermal);
#          inject/host_cap.HOST holds MHz: the next read_clock_cap or restore logs that cap on HOST
#          (a restore prints each host's own line for the hosts in $TALLY_HOSTS).
#          commit.HOST (not a fault): the commit checked out on HOST, reported by placeholder_proof.
#          arms.json (not a fault): what list_arms lists, the `arms` fact ({name: {config_digest?,
#          speculative_config?}}); without it list_arms fails (a site file names list_arms only when
#          the host can say which arms it starts).
set -euo pipefail

S=${1:?state dir}
ACTION=${2:?action}
shift 2
mkdir -p "$S/placeholders" "$S/fenced" "$S/caps" "$S/inject"
if [ ! -f "$S/production" ]; then  # a fresh state directory: production up, serving, warm
  echo up >"$S/production"; echo "production production ready" >"$S/engine"
  printf 'starting engine: arm production role production\nclock cap %s MHz\nengine ready\n' \
    "$(cat "$S/caps/production" 2>/dev/null || cat "$S/caps/default" 2>/dev/null || echo 2300)" >"$S/engine.log"
fi
[ -f "$S/identity" ] || printf 'arm=production image=vllm/vllm-openai:v0.12.0 model=example\n' >"$S/identity"
echo "$ACTION ${*:-}" | sed 's/ *$//' >>"$S/actions.log"

facts() { printf 'TALLY-FACTS %s\n' "$1"; }
fail() { echo "$ACTION: $*" >&2; exit "${CODE:-3}"; }
production() { cat "$S/production"; }
production_sha() { sha256sum "$S/identity" | cut -d' ' -f1; }
cap_of() { cat "$S/caps/$1" 2>/dev/null || cat "$S/caps/default" 2>/dev/null || echo 2300; }
engine_field() { [ -f "$S/engine" ] && cut -d' ' -f"$1" "$S/engine" || true; }
json_str() { if [ -n "$1" ]; then printf '"%s"' "$1"; else printf null; fi; }
host_list() {  # JSON list of the hosts with a file in $S/$1
  local out="" h
  for h in $(ls "$S/$1" | sort); do out="$out${out:+,}\"$h\""; done
  printf '[%s]' "$out"
}

# Injected faults (used once).
stamp() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }
if [ -f "$S/inject/dial_back" ]; then
  to=$(cat "$S/inject/dial_back"); rm -f "$S/inject/dial_back"
  from=$(grep -m1 '^clock cap ' "$S/engine.log" | tr -dc '0-9')
  n=$(($(wc -l <"$S/thermal.log" 2>/dev/null || echo 0) + 1))
  at=$(stamp)
  echo "THERMAL-WATCH $n $at $from $to dial_back" >>"$S/thermal.log"
  echo "THERMAL-WATCH $((n + 1)) $(stamp) $to $from recover" >>"$S/thermal.log"
fi
if [ -f "$S/inject/$ACTION.fail" ]; then
  CODE=$(cat "$S/inject/$ACTION.fail"); rm -f "$S/inject/$ACTION.fail"
  fail "injected failure"
fi
hang_if_asked() {
  if [ -f "$S/inject/$ACTION.hang" ]; then
    rm -f "$S/inject/$ACTION.hang"
    sleep 300 &
    echo "$$ $!" >"$S/hang.pids"   # this script's pid (= its process group) and its child
    wait
  fi
}

case "$ACTION" in
  preflight|probe)
    facts "{\"serving\":\"$(production)\",\"arm\":$(json_str "$(engine_field 1)"),\"role\":$(json_str "$(engine_field 2)"),\"engine\":$(json_str "$(engine_field 3)"),\"placeholders\":$(host_list placeholders),\"fenced\":$(host_list fenced),\"production_sha256\":\"$(production_sha)\"}"
    ;;
  drain)
    hang_if_asked
    echo draining >"$S/production"
    echo "production drained and stopped"
    rm -f "$S/engine"; echo down >"$S/production"
    facts '{"serving":"down"}'
    ;;
  snapshot)
    sha=$(production_sha); echo "$sha" >"$S/snapshot"
    echo "production snapshot sha256 $sha"
    facts "{\"snapshot_sha256\":\"$sha\"}"
    ;;
  start_arm)
    arm=${1:?arm}; role=${2:-$1}
    [ "$(production)" = down ] || fail "production is $(production); drain it first"
    [ ! -f "$S/engine" ] || fail "arm $(engine_field 1) is running; stop_arm first"
    echo "$arm $role starting" >"$S/engine"
    printf 'starting engine: arm %s role %s\nclock cap %s MHz\n' "$arm" "$role" "$(cap_of "$arm")" >"$S/engine.log"
    hang_if_asked
    echo "$arm $role ready" >"$S/engine"; echo "engine ready" >>"$S/engine.log"
    cat "$S/engine.log"
    # A real host reports what it started: the engine's effective speculative config (from its
    # config dump, null without speculative decoding), the digest of its configuration and its
    # identity; this pretend host reports what it was asked to start ($TALLY_ARM_CONFIG).
    # The host identities it reports (worker and Markov identity hashes, the experiment commit, the
    # worker tree) come from identities/ARM.json, as a real host reads them from its launch line.
    reported=$(IDENTITIES="$S/identities/$arm.json" python3 -c 'import json, os
arm = json.loads(os.environ.get("TALLY_ARM_CONFIG") or "{}")
spec = arm.get("speculative")
spec = None if spec == "none" else spec
out = {"speculative_config": spec, "config_digest": arm.get("config_digest"),
       "identity": {"arm": arm.get("name"), "config_digest": arm.get("config_digest")}}
if os.path.isfile(os.environ["IDENTITIES"]):
    with open(os.environ["IDENTITIES"], encoding="utf-8") as f:
        declared = json.load(f)
    names = ("worker_identity", "markov_identity", "experiment_commit", "worker_tree")
    out.update({k: v for k, v in declared.items() if k in names})
print(json.dumps(out)[1:-1])')
    if [ -f "$S/inject/config_digest" ]; then  # a test fault: the engine is not the declared config
      reported=$(printf '%s' "$reported" | sed "s/\"config_digest\": \"[0-9a-f]*\"/\"config_digest\": \"$(cat "$S/inject/config_digest")\"/")
      rm -f "$S/inject/config_digest"
    fi
    facts "{\"arm\":\"$arm\",\"role\":\"$role\",\"engine\":\"ready\",$reported}"
    ;;
  stop_arm|experiment_stop)
    hang_if_asked
    if [ ! -f "$S/engine" ]; then echo "no arm running"; facts '{"engine":null}'; exit 0; fi
    [ "$(engine_field 2)" != production ] || fail "the running engine is production; use drain"
    arm=$(engine_field 1); rm -f "$S/engine"
    echo "stopped arm $arm"
    facts "{\"arm\":\"$arm\",\"engine\":null}"
    ;;
  warmup)
    [ -f "$S/engine" ] || fail "no engine is running"
    # A real site times a first (cold) and a second (warm) request against the engine here.
    echo "warmup: cold TTFT 0.420000 s, warm TTFT 0.050000 s"
    facts '{"ttft_cold_s":0.42,"ttft_warm_s":0.05}'
    ;;
  fence)
    host=${1:?host}; touch "$S/fenced/$host"
    echo "fenced $host"
    facts "{\"fenced\":$(host_list fenced)}"
    ;;
  quiet_proof)
    [ ! -f "$S/engine" ] || fail "engine of arm $(engine_field 1) is running"
    echo "no engine process; no requests in flight"
    facts '{"quiet":true}'
    ;;
  production_down_proof)
    [ "$(production)" = down ] || fail "production is $(production)"
    echo "production is down: serving endpoint has no engine"
    facts '{"serving":"down"}'
    ;;
  placeholder_up)
    host=${1:?host}; touch "$S/placeholders/$host"
    echo "placeholder up on $host"
    facts "{\"placeholders\":$(host_list placeholders)}"
    ;;
  placeholder_down)
    host=${1:?host}; rm -f "$S/placeholders/$host" "$S/fenced/$host"
    echo "placeholder down on $host"
    facts "{\"placeholders\":$(host_list placeholders)}"
    ;;
  placeholder_proof)
    host=${1:?host}
    [ -f "$S/placeholders/$host" ] || fail "no placeholder on $host"
    echo "placeholder present on $host"
    commit=$(cat "$S/commit.$host" 2>/dev/null || true)   # the commit checked out on the host, if known
    tag=""; tag_commit=""                                   # the tag checked out there, and its commit
    if [ -f "$S/tag.$host" ]; then read -r tag tag_commit <"$S/tag.$host" || true; fi
    facts "{\"placeholders\":$(host_list placeholders)${commit:+,\"commit\":\"$commit\"}${tag:+,\"tag\":\"$tag\"}${tag_commit:+,\"tag_commit\":\"$tag_commit\"}}"
    ;;
  restore)
    want=${1:?snapshot sha256}
    [ -f "$S/snapshot" ] || fail "no production snapshot was taken"
    [ "$want" = "$(cat "$S/snapshot")" ] || fail "snapshot sha256 mismatch: asked $want, snapshot is $(cat "$S/snapshot")"
    hang_if_asked
    echo "production production starting" >"$S/engine"
    printf 'starting engine: arm production role production\nclock cap %s MHz\nengine ready\n' \
      "$(cap_of production)" >"$S/engine.log"
    echo "production production ready" >"$S/engine"; echo up >"$S/production"
    line=$(grep -m1 '^clock cap ' "$S/engine.log")
    for h in ${TALLY_HOSTS:+${TALLY_HOSTS//,/ }}; do   # each host's own line first, the engine's line last
      if [ -f "$S/inject/host_cap.$h" ]; then
        echo "$h: clock cap $(cat "$S/inject/host_cap.$h") MHz"; rm -f "$S/inject/host_cap.$h"
      else
        echo "$h: $line"
      fi
    done
    cat "$S/engine.log"
    echo "production restored to snapshot $want"
    facts "{\"snapshot_sha256\":\"$want\",\"serving\":\"up\"}"
    ;;
  watch)
    [ "$(production)" = up ] || fail "production is $(production)"
    [ "$(engine_field 2)" = production ] || fail "production engine is not running"
    if [ -f "$S/snapshot" ] && [ "$(production_sha)" != "$(cat "$S/snapshot")" ]; then
      fail "production identity differs from the snapshot"
    fi
    echo "production up, engine ready, identity matches the snapshot"
    facts "{\"watch\":\"PASS\",\"serving\":\"up\",\"production_sha256\":\"$(production_sha)\"}"
    ;;
  read_clock_cap)  # ARGS: the hosts; each host's own line first, the engine's line last
    [ -f "$S/engine" ] || fail "no engine is running"
    line=$(grep -m1 '^clock cap ' "$S/engine.log")
    for h in "$@"; do
      if [ -f "$S/inject/host_cap.$h" ]; then
        echo "$h: clock cap $(cat "$S/inject/host_cap.$h") MHz"; rm -f "$S/inject/host_cap.$h"
      else
        echo "$h: $line"
      fi
    done
    echo "$line"
    ;;
  pair_close)    # optional chained-close steps: close the measured pair, stash the scoped HOLD, close the commit
    echo "pair closed"
    ;;
  hold_stash)
    echo "scoped HOLD stashed"
    ;;
  commit_close)
    echo "commit closed"
    ;;
  read_thermal)  # the THERMAL-WATCH log: every dial-back, and the clock now
    touch "$S/thermal.log"
    cat "$S/thermal.log"
    out=""
    while read -r _ seq at from to kind; do
      [ "$kind" = dial_back ] || continue
      out="$out${out:+,}{\"seq\":$seq,\"at\":\"$at\",\"from_mhz\":$from,\"to_mhz\":$to}"
    done <"$S/thermal.log"
    now=$(grep -m1 '^clock cap ' "$S/engine.log" | tr -dc '0-9')
    facts "{\"current_clock_mhz\":${now:-null},\"dial_backs\":[$out]}"
    ;;
  list_arms)
    [ -f "$S/arms.json" ] || fail "no arms.json in $S: this host cannot say which arms it starts"
    facts "{\"arms\":$(tr -d '\n' <"$S/arms.json")}"
    ;;
  *)
    CODE=2 fail "unknown action"
    ;;
esac
