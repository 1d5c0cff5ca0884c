"""The floor every property group stands on: the Property type and its hypothesis runner
(``base``), calling a variant safely (``calls``), and the shared input strategies, examples and
bounds (``common``). Groups import only this floor, ``verify.exact`` and ``verify.spec``, never
each other."""
