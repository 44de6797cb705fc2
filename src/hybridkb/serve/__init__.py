"""The process that holds a DuckDB file serves it to every other hybridkb process.

DuckDB lets one process open a file for writing. Whichever hybridkb process holds
it (library, CLI, MCP server) also listens on a Unix domain socket; any other
process that finds the file held talks to that owner instead of waiting
(``hybridkb.connect`` returns a :class:`~hybridkb.serve.client.RemoteKnowledgeBase`).
When the owner exits, the next call of a client takes the file over and serves.

* ``endpoint.py`` where the owner listens and how a client finds it;
* ``handshake.py`` how both ends prove the token before anything else crosses;
* ``codec.py`` the JSON encoding of requests, results and errors (no pickle: a
  client never runs code it is sent);
* ``server.py`` the owner's listener; ``operations.py`` the operations it runs and
  where each member of the API declaration (hybridkb.api) goes;
* ``embedding.py`` a client's own embedder, asked for vectors by the owner mid-call;
* ``link.py`` one connection; ``client.py`` and ``handles.py`` the knowledge base,
  collections and graph a client gets.
"""
