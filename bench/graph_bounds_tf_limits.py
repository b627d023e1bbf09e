#!/usr/bin/env python
"""TensorFlow under an address-space limit (docs/graph-bounds.md): import, a matmul, then a ``tf.fill`` of
``N x 4 MiB``; the address space and resident set after each.  Careful: without a limit the fill is made.

    .venv/bin/python bench/graph_bounds_tf_limits.py LIMIT_GIB N      # LIMIT_GIB 0: no limit
"""
import resource, sys, os, time
lim = int(float(sys.argv[1]) * 2**30)
if lim > 0:
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
t = time.time()
import tensorflow as tf
def st():
    d = dict(l.split(":", 1) for l in open("/proc/self/status") if l.startswith(("VmPeak", "VmRSS", "VmHWM", "VmSize")))
    return {k: v.strip() for k, v in d.items()}
print("import", round(time.time() - t, 1), st(), flush=True)
x = tf.zeros([1000, 1000]); y = tf.matmul(x, x); print("matmul ok", st(), flush=True)
try:
    z = tf.fill([int(sys.argv[2]), 1024, 1024], 1.0); print("fill ok", float(tf.reduce_sum(z[0, 0])), st(), flush=True)
except Exception as e:
    print("fill err", type(e).__name__, str(e)[:200], flush=True)
