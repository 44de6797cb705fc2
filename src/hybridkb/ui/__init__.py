"""``hybridkb ui``: a local web page to see and steer the knowledge base.

Pages (server-rendered HTML, a little vanilla JavaScript, nothing from a CDN): the
collections, one collection (documents, sources, upload, follow, sync, delete,
drop), search (hits explained), a document (its chunks, a PDF's page images), the
graph (a node's neighbourhood), health (doctor, sizes, compact).

- :mod:`hybridkb.ui.gate`: who may call (token, cookie, CSRF, origin, Host);
- :mod:`hybridkb.ui.app`: the routes; :mod:`hybridkb.ui.views`,
  :mod:`hybridkb.ui.search_view`, :mod:`hybridkb.ui.graph_view` the pages that read,
  :mod:`hybridkb.ui.writes` those that change;
- :mod:`hybridkb.ui.uploads`, :mod:`hybridkb.ui.page_image`: files in and pictures out;
- :mod:`hybridkb.ui.server`: serving with the token scheme of ``hybridkb mcp --http``.

Needs the ``ui`` extra (``pip install 'hybridkb[ui]'``).
"""
