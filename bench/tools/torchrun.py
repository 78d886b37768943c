"""torchrun as launchers/torchrun_multinode.sh runs it (`python -m bench.tools.torchrun`, torchrun's
own arguments): a stop signal (Ctrl-C, SIGTERM from a scheduler) ends it as it ends bench, with one
line and the shell's code (130, 143), not torch's SignalException traceback and exit 1; a rendezvous
that fails (another torchrun on the same port, a store gone) is one line and 1. Its ranks
are stopped by torchrun itself, as before (and end with it even on SIGKILL: bench.__main__)."""

import signal
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.rendezvous.api import RendezvousError
from torch.distributed.run import main

from bench.errors import print_error

if __name__ == "__main__":
    # Until torch's agent takes the stop signals (as its ranks start), Ctrl-C ends it at once, as SIGTERM
    # does: Python's KeyboardInterrupt waited out torch's connect to the store in C++ (~1 min), then a traceback
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        main()
    except SignalException as stop:
        sys.exit(print_error(f"torchrun stopped by {stop.sigval.name}, and its ranks with it", 128 + stop.sigval))
    except RendezvousError as failed:  # e.g. two starts on one host and PORT: the second joins the first's store
        why = f"{failed} ({failed.__cause__})" if failed.__cause__ else str(failed)
        sys.exit(print_error(f"torchrun's rendezvous failed: {why}; another torchrun on that endpoint (PORT)?", 1))
