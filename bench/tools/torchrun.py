"""torchrun as launchers/torchrun_multinode.sh runs it (`python -m bench.tools.torchrun`, torchrun's
own arguments): a stop signal (Ctrl-C, SIGTERM from a scheduler) ends it as it ends bench, with one
line and the shell's code (130, 143), not torch's SignalException traceback and exit 1. Its ranks
are stopped by torchrun itself, as before (and end with it even on SIGKILL: bench.__main__)."""

import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main

from bench.errors import print_error

if __name__ == "__main__":
    try:
        main()
    except SignalException as stop:
        sys.exit(print_error(f"torchrun stopped by {stop.sigval.name}, and its ranks with it", 128 + stop.sigval))
