"""What the platform does for a caller, free of any transport.

GraphQL, REST, the Lambda handlers, the local stack and the CLI (and MCP, A2A or a
console) all call these: plain typed functions and classes taking the platform's
:class:`~codeshot.services.Services` and the caller's
:class:`~codeshot.models.Principal`. They check input, apply the domain's rules and raise
:mod:`codeshot.errors`; a transport only authenticates the caller and translates.

Everything here blocks (it calls AWS); async transports run it in a worker thread with
:func:`codeshot.usecases.threads.blocking`. ``registration`` (handshakes, embeddings) is
heavy to import and rarely used: import it where it is used.
"""
