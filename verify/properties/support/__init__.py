"""The floor every property group stands on: the Property type and its hypothesis runner
(``base``); calling a variant, its feature map and its state API safely (``calls``); sizes,
claim-respecting input strategies, examples, the exact reference and the stated bound
(``common``); applicability from the claims (``claims``); code paths, denominator modes and call
arguments (``paths``); input strategies and input surgery (``inputs``); observations of
computed values (``observe``); and the gradients of a variant and of the reference
(``grads``). Groups import only this floor, ``verify.exact``, ``verify.spec``,
``verify.strategies`` and ``derivations``, never each other."""
