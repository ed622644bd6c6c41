"""einkern: Einstein-notation tensor programs compiled to C/OpenMP and CUDA kernels.

>>> import einkern, numpy as np
>>> k = einkern.compile('''
... dims n = 4
... tensor A[n, n], B[n, n], C[n, n]
... C[i,j] = A[i,k] * B[k,j]
... ''', backend="cpu")
>>> A = np.random.rand(4, 4); B = np.random.rand(4, 4)
>>> bool(np.allclose(k(A, B), A @ B))
True
"""

from ._version import __version__
from .api import Kernel, compile, load
from .einsum import einsum, einsum_plan
from .errors import EinkernError
from .ir.bind import make_problem
from .ir.nodes import Problem, Program
from .reference import evaluate

__all__ = [
    "EinkernError",
    "Kernel",
    "Problem",
    "Program",
    "compile",
    "einsum",
    "einsum_plan",
    "evaluate",
    "load",
    "make_problem",
    "__version__",
]
