"""Plain-Python oracles shared by the tests: written the obvious way, independent of
the kernels they check."""
from swdask.kernels.cpu.reference import OP_INS, OP_MATCH


def python_summary(query, subject, qs, ss, ops, unknown):
    """CIGAR and counts, written the obvious way."""
    columns, i, j = [], qs, ss
    for op in ops:
        if op == OP_MATCH:
            columns.append("=" if query[i] == subject[j] and query[i] != unknown else "X")
            i, j = i + 1, j + 1
        elif op == OP_INS:
            columns.append("I")
            i += 1
        else:
            columns.append("D")
            j += 1
    runs = []
    for c in columns:
        if runs and runs[-1][1] == c:
            runs[-1][0] += 1
        else:
            runs.append([1, c])
    cigar = "".join(f"{k}{c}" for k, c in runs)
    gap_opens = sum(1 for _, c in runs if c in "ID")
    return cigar, columns.count("="), columns.count("X"), gap_opens, len(columns)
