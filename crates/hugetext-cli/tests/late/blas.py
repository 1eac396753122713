# A BLAS-heavy loop through numpy (its bundled OpenBLAS is dlopen'ed by the
# import). Prints a checksum; with an argument, also this process's
# /proc/self/smaps on stderr (read by the test).
import sys
import numpy as np

n = 160
a = (np.arange(n * n, dtype=np.float64).reshape(n, n) % 97) / 97.0
s = 0.0
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 30):
    s += float((a @ a).trace())
    a = (a @ a) % 1.0
print("checksum %.9e" % s)
if len(sys.argv) > 2:
    sys.stderr.write(open("/proc/self/smaps").read())
