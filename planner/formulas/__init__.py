"""Pure formulas: functions of numbers that run on floats, numpy arrays and sympy symbols."""
