"""`agent-env docs serve`: the user guide (docs/, shipped in the package as `agent_env/docs_pages`) as an MCP
server that coding agents search and read.

- `pages`: where the guide is, its pages (titles and order from mkdocs.yml's nav) and their sections, with
  the anchors MkDocs gives their headings.
- `search`: a BM25F index of the sections, built once at start (page titles and headings weigh more).
- `server`: the MCP tools (`search_docs`, `read_doc`, `list_docs`) over streamable HTTP behind the shared
  door (`guard.HostGuard`), or over stdio.
"""
