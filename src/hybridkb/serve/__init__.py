"""The process that holds a DuckDB file serves it to every other hybridkb process.

DuckDB lets one process open a file for writing. Whichever hybridkb process holds
it (library, CLI, MCP server) also listens on a Unix domain socket; any other
process that finds the file held talks to that owner instead of waiting
(``hybridkb.connect`` returns a :class:`~hybridkb.serve.client.RemoteKnowledgeBase`).
When the owner exits, the next call of a client takes the file over and serves.

* ``endpoint.py`` where the owner listens and how a client finds and trusts it;
* ``codec.py`` the JSON encoding of requests, results and errors (no pickle: a
  client never runs code it is sent);
* ``server.py`` the owner's listener and the operations it runs;
* ``client.py`` the knowledge base a client gets.
"""
