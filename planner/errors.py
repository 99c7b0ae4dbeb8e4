"""The one exception plan3d raises for bad input; the CLI prints its message on one line."""


class PlanError(ValueError):
    """Something the user gave is wrong; the message says what, and what would be right."""


class NoFeasiblePlan(PlanError):
    """Nothing fits: the message carries the diagnosis."""
