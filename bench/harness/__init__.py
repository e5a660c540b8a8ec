"""The machinery of bench/bench.py: processes, loads, checks, goals and the report.

The rows are declared in bench/rows.py; the harness knows them only by their attributes. Modules
import only modules listed above them in this order: log, tools, procs, knobs, numbers, redis,
window, load, row, fronts, gateway, wrk, loads, half, checks, goals, report, context.
"""
