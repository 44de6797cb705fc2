"""A process that holds a DuckDB file and asked to serve it serves every other process.

DuckDB lets one process open a file for writing. Where that process asked to serve
(``connect(serve=True)``: the CLI, ``hybridkb mcp``, ``watch``; ``HYBRIDKB_SERVE``
overrides) it also listens on a Unix domain socket; any other process that finds the
file held talks to that owner instead of waiting (its knowledge base runs on an
:class:`~hybridkb.serve.owner.OwnerEngine`). When the owner exits, the next call of a
client takes the file over.

* ``endpoint.py`` where the owner listens and how a client finds it;
* ``handshake.py`` how both ends prove the token before anything else crosses;
* ``wire.py`` what may cross: the flat calls of hybridkb.engine, by name, derived
  from the declaration;
* ``codec.py`` the JSON encoding of arguments, results and errors (no pickle: a
  client never runs code it is sent);
* ``server.py`` the owner's listener; ``embedding.py`` a client's own embedder,
  asked for vectors by the owner mid-call;
* ``link.py`` one connection; ``owner.py`` the engine a client's handles hold.
"""
