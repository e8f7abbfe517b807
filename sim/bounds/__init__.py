"""What kvscope accepts and spends: input files, JSON text, and the work budget every simulation must fit.

Imports: nothing of kvscope's (the lowest layer; tests/test_layers.py holds the order).
Exports: ``textfile`` (input files at most so many bytes, as UTF-8 text), ``jsontext`` (JSON with finite
numbers and bounded nesting), ``budget`` (``Cost``, ``Budget``, ``OverBudget``; the stop signal
``checkpoint``/``stoppable``/``Stopped``).
"""
