"""The command-template driver: each host action is a command from the site file.

Quoting: a template is split into arguments once, when the site loads, with
:func:`shlex.split` (POSIX rules: quotes group, backslash escapes); placeholders are
then filled in *inside* each argument, so a value never splits or merges arguments
and no local shell sees it (``shell=False``). Write ``bash -c '...'`` explicitly to get
a shell. Values that come from the window (host, window, start, role, arm, snapshot,
seed) must be plain words (letters, digits and ``. _ - : @ % + = , /``, not starting
with ``-``, or a lone ``-``): a plain word means the same thing to every shell that
parses it, however many times, and is never read as an option; structured values travel
as JSON on the command's stdin and in ``$TALLY_REQUEST``.

Shells that parse a command line again (:func:`reparsed_arguments`): everything after
the destination of ``ssh`` (ssh joins its arguments into one string that the remote
user's shell parses), ssh's own options, the script of ``sh -c`` (``bash``, ``dash``
...) and the program text of an interpreter (``python -c``, ``perl -e``, an ``awk``
program). There a value must be a plain word, whatever placeholder it fills (``{state_dir}``
and ``{serving_url}`` included: checked when the site loads), so it is quoted for that
shell by being its own quoting; a plain word is checked again when the command is
built. ``{arm_config}`` (JSON, with strings from the plan) may fill an argument only of
a command that runs no shell and no ``ssh`` (a template that puts it after one is
refused when the site loads), and it never carries the arm's free-text
``description``: the plan's free text reaches a command only as data, on stdin and in
the environment.

A command runs in its own process group with the site file's directory as working
directory; its stdout and stderr are captured whole (through files, so a process it
leaves behind cannot hold the driver up). At its timeout the whole group gets
SIGTERM, then SIGKILL after ``kill_grace_s``; so it does when an exception (Ctrl-C, a
signal handler's) interrupts the wait, before the exception goes on.

Facts come from stdout: each line ``TALLY-FACTS {json object}`` is merged in order
(later keys win); for ``start_arm``, ``restore`` and ``read_clock_cap`` the last
``clock cap N MHz`` line also gives ``clock_cap_mhz`` and ``log_line``, and lines
``HOST: ... clock cap N MHz`` give each host's own reading (``hosts``). A facts line is
hostile input: it is read by the bounded strict JSON reader (at most
``MAX_FACTS_LINE_BYTES``, nested at most ``MAX_FACTS_DEPTH`` levels, no duplicate member, no
NaN) and must hold only what an event payload can carry (integers within +/-(2^53-1),
valid Unicode); a line that is not is a failure of the action, named, never an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import string
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ledger.canonical import canonical
from ledger.errors import ExternalError, FormatError
from ledger.strictjson import read_json

from ..vocabulary import CounterSourceName
from .base import ACTIONS, ActionResult, ServedArm, check_action, served_from_facts, settle

__all__ = ["INHERITED_ENV", "PLACEHOLDERS", "CommandTemplate", "CommandsDriver", "command_environment",
           "group_members", "is_plain_word", "parse_facts", "parse_template", "reparsed_arguments"]

# Placeholder -> where its value comes from (docs/site.md, "Placeholders").
PLACEHOLDERS: Mapping[str, str] = {
    "action": "the action's name",
    "host": "the host the action runs on (per-host calls only)",
    "host_role": "that host's role, head or worker (per-host calls only)",
    "hosts": "every host name, comma-separated, head first",
    "head": "the head host's name",
    "window": "params window: the window id",
    "start": "params start: the start id (s1, B2, ...)",
    "role": "params role: the arm's role (A, B, P, production)",
    "arm": "params arm: the arm's name",
    "arm_config": "params arm_config: the arm's declared config as compact JSON, without its description",
    "snapshot": "params snapshot_sha256: the production snapshot to restore or check",
    "seed": "params seed",
    "state_dir": "the site's state_dir (absolute)",
    "serving_url": "the serving endpoint",
    "production_clock_cap_mhz": "production's configured clock cap",
    "timeout_s": "this action's timeout in seconds",
}

# Placeholders filled from params, and the params key each reads.
_FROM_PARAMS = {"window": "window", "start": "start", "role": "role", "arm": "arm", "arm_config": "arm_config",
                "snapshot": "snapshot_sha256", "seed": "seed"}
# A plain word: never split, expanded or read as an option (a lone "-", "no window", is no option either).
_WORD = re.compile(r"(?:-|[A-Za-z0-9._:@%+=,/][A-Za-z0-9._:@%+=,/-]*)?")
_WORD_RULE = "letters, digits, . _ - : @ % + = , /; not starting with -"
# Programs whose command line is parsed again by a shell (docs/site.md, "Remote shells").
REMOTE_PROGRAMS = frozenset({"ssh", "autossh"})
SHELL_PROGRAMS = frozenset({"sh", "bash", "dash", "ash", "ksh", "mksh", "zsh", "yash", "posh", "fish", "csh", "tcsh"})
_SSH_OPTIONS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
_SHELL_OPTIONS_WITH_VALUE = frozenset("oO")
# Interpreters whose option takes a program text: python -c CODE, perl -e CODE, ...
CODE_OPTIONS = {"python": ("-c",), "python3": ("-c",), "perl": ("-e", "-E"), "ruby": ("-e",), "node": ("-e", "-p"),
                "php": ("-r",), "lua": ("-e",), "awk": (), "gawk": (), "mawk": ()}
FREE_TEXT = frozenset({"arm_config"})        # placeholders whose value carries strings from the plan
_DROPPED_FROM_ARGV = ("description",)        # the arm's free text: never on a command line
_FACTS_PREFIX = "TALLY-FACTS "
# What a site command inherits from the runner's environment (docs/site.md, "Environment"):
# nothing else, so no secret of the runner (TALLY_KEY_PASSPHRASE, a database URL with its
# password, cloud credentials) reaches a command, its output blob or an exported bundle.
INHERITED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
                 "SSH_AUTH_SOCK", "SSH_AGENT_PID")
NEVER_PASSED = re.compile(r"TALLY_.*")
_CLOCK_LINE = re.compile(r"\bclock cap (\d+) MHz\b")
_HOST_CLOCK_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,62}): (.*\bclock cap (\d+) MHz\b.*)")
_CLOCK_ACTIONS = frozenset({"start_arm", "restore", "read_clock_cap"})
MAX_FACTS_LINE_BYTES = 64 << 10   # one TALLY-FACTS line (facts are small: states, digests, identities)
MAX_FACTS_DEPTH = 16              # nesting of one line's object (it is recorded nested in an event payload)
MAX_QUOTED_LINE = 1000            # characters of a stderr or log line quoted in a fact


def is_plain_word(value: str) -> bool:
    """Whether ``value`` may fill an argument a shell parses again (``_WORD``)."""
    return _WORD.fullmatch(value) is not None


def command_environment(environ: Mapping[str, str], pass_env: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment a site command starts with: the allow-list, ``LC_*``, and the site's ``pass_env``."""
    allowed = set(INHERITED_ENV) | set(pass_env)
    return {name: value for name, value in environ.items()
            if (name in allowed or name.startswith("LC_")) and not NEVER_PASSED.fullmatch(name)}


@dataclass(frozen=True)
class CommandTemplate:
    """One action's command: argument templates, the placeholders they use, and those a shell parses again."""

    action: str
    text: str
    argv: tuple[str, ...]
    fields: frozenset[str]
    timeout_s: float
    reparsed: frozenset[str] = frozenset()   # placeholders in an argument a shell parses again

    def render(self, values: Mapping[str, str]) -> list[str]:
        return [arg.format_map(values) for arg in self.argv]


def _program(arg: str) -> str:
    return arg.rsplit("/", 1)[-1]


def _ssh_reparsed(argv: tuple[str, ...], at: int) -> tuple[set[int], int]:
    """ssh at ``argv[at]``: the indexes of its options, their values, the destination and the remote command."""
    marked: set[int] = set()
    index = at + 1
    while index < len(argv) and argv[index].startswith("-") and argv[index] != "-":
        marked.add(index)
        if argv[index] == "--":
            index += 1
            break
        cluster = argv[index][1:]
        index += 1
        for position, flag in enumerate(cluster):
            if flag in _SSH_OPTIONS_WITH_VALUE:
                if position == len(cluster) - 1 and index < len(argv):  # the value is the next argument
                    marked.add(index)
                    index += 1
                break
    marked.update(range(index, len(argv)))  # the destination and the remote command
    return marked, len(argv)


def _shell_reparsed(argv: tuple[str, ...], at: int) -> set[int]:
    """A shell at ``argv[at]``: the index of its ``-c`` script (nothing when it runs a script file)."""
    index, command = at + 1, False
    while index < len(argv) and argv[index][:1] in ("-", "+") and argv[index] not in ("-", "+", "--"):
        cluster = argv[index][1:]
        if cluster[:1] == "-":  # a long option: --login, --rcfile FILE, --init-file FILE
            index += 2 if cluster in ("-rcfile", "-init-file") else 1
            continue
        command = command or "c" in cluster
        index += 2 if cluster[-1:] in _SHELL_OPTIONS_WITH_VALUE else 1
    if index < len(argv) and argv[index] == "--":
        index += 1
    return {index} if command and index < len(argv) else set()


def reparsed_arguments(argv: tuple[str, ...]) -> tuple[set[int], int | None]:
    """Which arguments of ``argv`` a shell parses again, and where the first shell or ssh program is.

    After ``ssh`` (or ``autossh``): its options and their values, the destination and every
    argument of the remote command; after a shell (``sh``, ``bash`` ...) given ``-c``: its
    script. Wrappers before them (``sudo``, ``env``, ``timeout``) change nothing.
    """
    marked: set[int] = set()
    first: int | None = None
    index = 0
    while index < len(argv):
        name = _program(argv[index])
        if name in REMOTE_PROGRAMS:
            first = index if first is None else first
            found, index = _ssh_reparsed(argv, index)
            marked |= found
            continue
        if name in SHELL_PROGRAMS:
            first = index if first is None else first
            marked |= _shell_reparsed(argv, index)
        elif name in CODE_OPTIONS or re.fullmatch(r"python3(\.\d+)?", name):
            first = index if first is None else first
            marked |= _code_argument(argv, index, CODE_OPTIONS.get(name, ("-c",)))
        index += 1
    return marked, first


def _code_argument(argv: tuple[str, ...], at: int, flags: tuple[str, ...]) -> set[int]:
    """An interpreter at ``argv[at]``: the index of the program text it is given (awk: its first operand)."""
    rest = range(at + 1, len(argv))
    if not flags:  # awk [-F fs] [-v a=b] 'PROGRAM' file...: the first operand (none with -f progfile)
        skip = False
        for index in rest:
            arg = argv[index]
            if skip:
                skip = False
            elif arg == "-f" or arg.startswith("-f"):
                return set()
            elif arg in ("-F", "-v"):
                skip = True
            elif not arg.startswith("-") or arg == "-":
                return {index}
        return set()
    for index in rest:
        if argv[index] in flags and index + 1 < len(argv):
            return {index + 1}
    return set()


def parse_template(action: str, text: str, timeout_s: float, where: str) -> CommandTemplate:
    """Split and check a command template; ``FormatError`` names ``where`` and the placeholder."""
    if action not in ACTIONS:
        raise FormatError(f"{where}: unknown action {action!r}; actions: {', '.join(ACTIONS)}")
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise FormatError(f"{where}: cannot split the command: {exc}") from None
    if not argv:
        raise FormatError(f"{where}: empty command")
    fields: set[str] = set()
    formatter = string.Formatter()
    for arg in argv:
        try:
            parsed = list(formatter.parse(arg))
        except ValueError as exc:
            raise FormatError(f"{where}: bad placeholder in {arg!r}: {exc} (write {{{{ and }}}} for braces)") from None
        for _literal, name, spec, conversion in parsed:
            if name is None:
                continue
            if name not in PLACEHOLDERS:
                raise FormatError(f"{where}: action {action}: unknown placeholder {{{name}}}; "
                                  f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
            if spec or conversion:
                raise FormatError(f"{where}: action {action}: placeholder {{{name}}} takes no format spec or "
                                  "conversion")
            fields.add(name)
    if "{" in argv[0] or "}" in argv[0]:
        raise FormatError(f"{where}: action {action}: the program name cannot be a placeholder")
    marked, first = reparsed_arguments(argv)
    reparsed: set[str] = set()
    for index, arg in enumerate(argv):
        names = {name for _literal, name, _spec, _conv in formatter.parse(arg) if name is not None}
        if index in marked:
            reparsed |= names
        free = names & FREE_TEXT
        if free and first is not None and index > first:
            name = sorted(free)[0]
            shell = _program(argv[first])
            raise FormatError(f"{where}: action {action}: {{{name}}} after {shell} (a command line "
                              f"{'the remote shell' if shell in REMOTE_PROGRAMS else 'a shell'} parses again) could "
                              "run the plan's text as code; read it from the JSON request on stdin (ssh forwards it), "
                              "or $TALLY_ARM_CONFIG (docs/site.md, \"Remote shells\")")
    return CommandTemplate(action, text, argv, frozenset(fields), timeout_s, frozenset(reparsed))


def parse_facts(action: str, stdout: bytes) -> tuple[dict[str, Any], str | None]:
    """Facts from a command's stdout, and the problem with them (``None`` when fine)."""
    facts: dict[str, Any] = {}
    text = stdout.decode("utf-8", "replace")
    clock: tuple[int, str] | None = None
    hosts: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(_FACTS_PREFIX):
            value, problem = _facts_line(line[len(_FACTS_PREFIX):])
            if problem is not None:
                return facts, f"stdout line {number}: {problem}"
            facts.update(value)
            continue
        match = _CLOCK_LINE.search(line)
        if match:
            clock = (int(match.group(1)), line.strip()[:MAX_QUOTED_LINE])
            own = _HOST_CLOCK_LINE.fullmatch(line.strip())
            if own is not None and len(hosts) < 64:
                hosts[own.group(1)] = {"clock_cap_mhz": int(own.group(3)), "log_line": own.group(2)[:300]}
    if action in _CLOCK_ACTIONS and clock is not None:
        said = facts.get("clock_cap_mhz")
        if said is not None and said != clock[0]:
            return facts, f"TALLY-FACTS clock_cap_mhz {said} disagrees with the log line {clock[1]!r}"
        facts.setdefault("clock_cap_mhz", clock[0])
        facts.setdefault("log_line", clock[1])
        if hosts:
            facts.setdefault("hosts", hosts)
    return facts, None


def _facts_line(text: str) -> tuple[dict[str, Any], str | None]:
    """One ``TALLY-FACTS`` line's object, or why it cannot be taken (bounded, strict, recordable)."""
    try:
        value = read_json(text, "the line", max_bytes=MAX_FACTS_LINE_BYTES, max_depth=MAX_FACTS_DEPTH)
    except FormatError as exc:
        return {}, f"TALLY-FACTS is not JSON the runner can read ({str(exc)[:300]})"
    if not isinstance(value, dict):
        return {}, "TALLY-FACTS must be a JSON object"
    try:
        canonical(value, "facts")   # what an event payload can carry
    except FormatError as exc:
        return {}, f"TALLY-FACTS cannot be recorded ({str(exc)[:300]})"
    return value, None


class CommandsDriver:
    """Runs each host action as a command template from a site file (``kind = "commands"``)."""

    kind = "commands"

    allow_unreachable: Mapping[str, tuple[str, ...]] = {}   # mode -> hosts (the site file's table)

    def __init__(self, *, hosts: Mapping[str, str], serving_url: str, metrics_urls: tuple[str, ...],
                 production_clock_cap_mhz: int | None, commands: Mapping[str, CommandTemplate], cwd: Path,
                 state_dir: Path | None = None, kill_grace_s: float = 5.0, pass_env: tuple[str, ...] = (),
                 counter_source: CounterSourceName = "vllm") -> None:
        self._roles = dict(hosts)
        self._counter_source: CounterSourceName = counter_source
        self.pass_env = tuple(pass_env)
        self._hosts = tuple(hosts)
        self._serving_url = serving_url
        self._metrics_urls = metrics_urls
        self._cap = production_clock_cap_mhz
        self._commands = dict(commands)
        self.cwd = cwd
        self.state_dir = state_dir
        self.kill_grace_s = kill_grace_s
        self._served: dict[str, ServedArm] | None = None

    @property
    def hosts(self) -> tuple[str, ...]:
        return self._hosts

    @property
    def host_roles(self) -> Mapping[str, str]:
        return dict(self._roles)

    @property
    def serving_url(self) -> str:
        return self._serving_url

    @property
    def metrics_urls(self) -> tuple[str, ...]:
        return self._metrics_urls

    @property
    def counter_source(self) -> CounterSourceName:
        return self._counter_source

    @property
    def production_clock_cap_mhz(self) -> int | None:
        return self._cap

    @property
    def clocks(self) -> bool:
        return self._cap is not None

    def served_arms(self) -> Mapping[str, ServedArm] | None:
        """What the site's optional ``list_arms`` command lists (``None`` without one: a command site's
        ``start_arm`` is the operator's script, and which arms it starts it does not say otherwise).

        Run once per driver, read-only, before the drain; not recorded (like the fit probes of the
        serving endpoint, it runs before the window's first recorded step, and a refusal appends
        nothing). A failed or malformed answer is ``ExternalError``: the site was asked and could not say.
        """
        if "list_arms" not in self._commands:
            return None
        if self._served is None:
            result = self.run("list_arms", None, {})
            if not result.ok:
                error = str(result.facts.get("error") or f"exit {result.exit_code}")[:300]
                raise ExternalError(f"the site's list_arms action failed, so the arms it can start are not known: "
                                    f"{error}")
            self._served = served_from_facts(result.facts["arms"])
        return self._served

    @property
    def actions(self) -> frozenset[str]:
        return frozenset(self._commands)

    def close(self) -> None:
        """Nothing to release: each action is its own process."""

    def timeout_s(self, action: str) -> float:
        return self._template(action).timeout_s

    def _template(self, action: str) -> CommandTemplate:
        check_action(self, action, None)
        return self._commands[action]

    # ------------------------------------------------------------------ running

    def argv(self, action: str, host: str | None, params: Mapping[str, Any]) -> list[str]:
        """The command line ``run`` would execute (``FormatError`` for a missing or unsafe value)."""
        check_action(self, action, host)
        template = self._commands[action]
        values = {name: self._value(template, name, host, params) for name in template.fields}
        for name in sorted(template.reparsed):  # a shell parses these again: plain words only
            if not _WORD.fullmatch(values[name]):
                raise FormatError(f"site action {action}: {{{name}}} = {values[name][:80]!r} is not a plain word "
                                  f"({_WORD_RULE}), and a shell parses this argument again")
        return template.render(values)

    def _value(self, template: CommandTemplate, name: str, host: str | None, params: Mapping[str, Any]) -> str:
        action = template.action
        if name in ("host", "host_role"):
            if host is None:
                raise FormatError(f"site action {action}: {{{name}}} needs a host, but the action was run "
                                  "site-wide (host None)")
            value = host if name == "host" else self._roles[host]
        elif name in _FROM_PARAMS:
            key = _FROM_PARAMS[name]
            if params.get(key) is None:
                raise FormatError(f"site action {action}: placeholder {{{name}}} needs params[{key!r}], not given")
            raw = params[key]
            if name == "arm_config":  # the arm's config, without its free text
                shown = {k: v for k, v in raw.items() if k not in _DROPPED_FROM_ARGV} if isinstance(raw, Mapping) \
                    else raw
                return json.dumps(shown, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            value = str(raw)
            if isinstance(raw, bool) or not isinstance(raw, str | int) or not _WORD.fullmatch(value):
                raise FormatError(f"site action {action}: params[{key!r}] = {str(raw)[:80]!r} is not a plain word "
                                  f"({_WORD_RULE})")
        elif name == "action":
            value = action
        elif name == "hosts":
            value = ",".join(self._hosts)
        elif name == "head":
            value = self._hosts[0]
        elif name == "state_dir":
            if self.state_dir is None:
                raise FormatError(f"site action {action}: {{state_dir}} is used but the site sets no state_dir")
            value = str(self.state_dir)
        elif name == "serving_url":
            value = self._serving_url
        elif name == "production_clock_cap_mhz":
            value = "" if self._cap is None else str(self._cap)
        else:  # timeout_s
            value = f"{template.timeout_s:g}"
        return value

    def _environment(self, action: str, host: str | None, params: Mapping[str, Any], request: str) -> dict[str, str]:
        env = command_environment(os.environ, self.pass_env)
        env.update({
            "TALLY_ACTION": action, "TALLY_HOST": host or "", "TALLY_HOST_ROLE": self._roles.get(host or "", ""),
            "TALLY_HOSTS": ",".join(self._hosts), "TALLY_STATE_DIR": str(self.state_dir or ""),
            "TALLY_SERVING_URL": self._serving_url, "TALLY_REQUEST": request,
            "TALLY_TIMEOUT_S": f"{self._commands[action].timeout_s:g}",
        })
        for name, key in _FROM_PARAMS.items():
            raw = params.get(key)
            if raw is None:
                continue
            text = json.dumps(raw, sort_keys=True, separators=(",", ":")) if name == "arm_config" else str(raw)
            env[f"TALLY_{name.upper()}"] = text
        return env

    def run(self, action: str, host: str | None, params: Mapping[str, Any]) -> ActionResult:
        argv = self.argv(action, host, params)
        template = self._commands[action]
        request = json.dumps({"action": action, "host": host, "host_role": self._roles.get(host or ""),
                              "hosts": list(self._hosts), "params": dict(params)},
                             sort_keys=True, separators=(",", ":"), default=str)
        env = self._environment(action, host, params, request)
        with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            stdin.write(request.encode("utf-8") + b"\n")
            stdin.seek(0)
            began = time.monotonic()
            try:
                process = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, cwd=self.cwd, env=env,
                                           start_new_session=True)
            except OSError as exc:
                code = 127 if isinstance(exc, FileNotFoundError) else 126
                message = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
                ok, facts = settle(action, host, params, False, {"error": message})
                return ActionResult(action, host, ok, code, time.monotonic() - began, False, b"",
                                    message.encode("utf-8"), facts)
            timed_out = False
            try:
                code_or_none: int | None = process.wait(timeout=template.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(process, self.kill_grace_s)
                code_or_none = None
            except BaseException:
                # Ctrl-C, SIGTERM turned into an exception, ...: the command must not outlive the
                # runner's decision to stop, or it would race the restore that follows
                _kill_group(process, self.kill_grace_s)
                raise
            duration = time.monotonic() - began
            stdout, stderr = _read(out), _read(err)
        return self._result(action, host, params, code_or_none, timed_out, duration, stdout, stderr, template)

    def _result(self, action: str, host: str | None, params: Mapping[str, Any], code: int | None, timed_out: bool,
                duration: float, stdout: bytes, stderr: bytes, template: CommandTemplate) -> ActionResult:
        facts, problem = parse_facts(action, stdout)
        ok = code == 0 and not timed_out
        if problem is not None:
            ok = False
            facts["error"] = problem
        elif timed_out:
            facts.setdefault("error", f"{action} timed out after {template.timeout_s:g} s; its process group was "
                                      "killed")
        elif code != 0 and "error" not in facts:
            last = stderr.decode("utf-8", "replace").strip().splitlines()
            how = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"
            facts["error"] = f"{action} failed ({how})" + (f": {last[-1][:MAX_QUOTED_LINE]}" if last else "")
        ok, facts = settle(action, host, params, ok, facts)
        return ActionResult(action, host, ok, code, duration, timed_out, stdout, stderr, facts)


def _read(handle: IO[bytes]) -> bytes:
    handle.seek(0)
    return handle.read()


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from ``/proc`` where there is one."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _kill_group(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the command's process group, SIGKILL what is left after ``grace_s``, reap the leader."""
    pgid = process.pid  # start_new_session: the command leads its own group
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if process.poll() is not None and not group_members(pgid):
            return
        time.sleep(0.02)
    _signal_group(pgid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 5.0
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
