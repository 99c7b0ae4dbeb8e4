"""One plan's costs: the cost model composed from planner/formulas/ (memory, communication,
pipeline, time) with the framework's conventions, checked against the layout rules, on floats,
numpy arrays (the search) or sympy symbols (explain)."""
