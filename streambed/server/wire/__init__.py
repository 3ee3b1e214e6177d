"""Postgres wire protocol (v3) server for the query gateway.

Three layers, as in BemiDB: `server` owns sockets and threads, `handler` turns frontend
messages into backend messages (no I/O), and the database layer (`streambed.server.database`)
executes SQL and does any rewriting. `messages`, `params`, `results`, `auth` and `tls` are the
small pure pieces the handler and the socket layer are built from.

Why not subclass buenavista 0.5.0's `BuenaVistaHandler`: every one of its methods writes to the
socket while it decides what to answer (`self.wfile.write` inside `handle_bind`, `send_error`,
...), its reads are not length-checked, and almost every method is one we must replace (typed
parameters, SQLSTATE errors, SCRAM, TLS, cancel, streamed results, portal suspension). A
subclass would override all of it and still inherit the socket coupling the handler must not
have. We reuse its byte codes (`ServerResponse`, `ClientCommand`) and write the small pieces.
"""
