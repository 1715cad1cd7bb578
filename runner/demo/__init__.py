"""``tally demo``: self-contained walkthroughs that need no setup."""
