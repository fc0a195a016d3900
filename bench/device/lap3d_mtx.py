#!/usr/bin/env python3
"""Write the 7-point 3-D Laplacian on an n^3 grid as a Matrix Market file (symmetric, lower
triangle), with no third-party modules: the GPU host's Python has none."""
import sys

n = int(sys.argv[1])
N = n ** 3
out = sys.stdout
nnz = N + 3 * (n - 1) * n * n  # the diagonal and one neighbour below per axis
out.write("%%MatrixMarket matrix coordinate real symmetric\n")
out.write("%d %d %d\n" % (N, N, nnz))
lines = []
for k in range(n):
    for j in range(n):
        for i in range(n):
            row = (k * n + j) * n + i + 1
            lines.append("%d %d 6\n" % (row, row))
            if i > 0:
                lines.append("%d %d -1\n" % (row, row - 1))
            if j > 0:
                lines.append("%d %d -1\n" % (row, row - n))
            if k > 0:
                lines.append("%d %d -1\n" % (row, row - n * n))
        if len(lines) > 100000:
            out.write("".join(lines))
            lines = []
out.write("".join(lines))
