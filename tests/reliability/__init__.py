"""Reliability suite: overload, client and engine faults, drain, soak, hostile input, security."""
