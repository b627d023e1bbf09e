"""Support module for ``tests/tf/test_bounded.py``: imported by a bounded runs' zygote (``imports=``), it leaves a
second thread running, so the zygote may not fork (:func:`gruconv.tf.bounded._fork_safe`) and serves the run
itself."""

import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
