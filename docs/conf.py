"""Sphinx configuration of the sdpa-bench docs site (`tox -e docs`).

Why Sphinx with MyST: the project is a Python package whose neighbours (pytest-benchmark, asv, torch) publish
Sphinx sites, and the pages stay Markdown that reads the same on a repository browser. The CLI and API references
are generated from the code (every command's argparse parser, the API's docstrings) into those Markdown pages by
`_ext/static_reference.py`, which also fails this build when a page is stale, so the options exist once and read
on a repository browser too.

Nothing is downloaded at build time: no intersphinx (it fetches inventories); other projects' docs are plain links.
Warnings are errors in CI (`sphinx-build -W --keep-going`), which makes every broken internal link, missing
page or unknown anchor fail the build.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "sdpa-bench"
author = "the sdpa-bench authors"
copyright = "the sdpa-bench authors, BSD-3-Clause"

extensions = [
    "myst_parser",
    "static_reference",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# raw data: a sweep's folder under records/data is kept as the sweep wrote it (its report's plots are re-rendered
# from results.json, not kept), so it is linked as files, not built as pages; the verdict files beside it are pages
exclude_patterns = ["_build", "records/data/*/**"]

# `[text](page.md#a-heading)` links resolve to heading anchors, as on a repository browser
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
# every link that looks like a path must resolve to a page or a file in the tree
myst_all_links_external = False

# unresolved Python references in signatures (torch.Tensor, ...) are not ours to document
nitpicky = False
# generated reports (the example report, the verdicts in records/data) start their sections at ### or have no title
suppress_warnings = ["myst.header", "toc.no_title"]

html_theme = "alabaster"
html_title = "sdpa-bench"
html_theme_options = {"description": "a performance-regression suite for scaled dot-product attention"}
