"""Reading results back and comparing runs: statistics, sweep tables, scaling, plots."""
