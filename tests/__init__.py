"""swdask's tests, laid out as the package is (``tests/kernels/cuda`` tests
``kernels/cuda``, ``tests/jobs/search`` tests ``swdask/jobs/search``...).

A package, so that two test modules of one name in different folders can coexist and
every module imports the shared helpers as ``tests.helpers``.
"""
