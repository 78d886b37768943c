"""`python -m bench.doctor [doctor.budget_s=180] [doctor.what_ifs=true] [doctor.out=DIR] <overrides>`"""

from bench.doctor.cli import main
from bench.machine.children import exit_without_teardown

if __name__ == "__main__":
    exit_without_teardown(main)
