"""`python -m bench.doctor [doctor.budget_s=180] [doctor.what_ifs=true] [doctor.out=DIR] <overrides>`"""

import sys

from bench.doctor.cli import main

if __name__ == "__main__":
    sys.exit(main())
