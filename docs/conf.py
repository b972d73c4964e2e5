"""The documentation site's configuration: Sphinx, MyST Markdown and the PyData theme.

make docs builds it with warnings as errors; tests/test_docs.py builds it too and checks
every internal link and anchor of the built pages."""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))

project = "Nightjar ticket-desk lab"
author = "The Nightjar lab's authors"
copyright = "the Nightjar lab's authors"

extensions = ["myst_parser", "nightjar_docs"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]
language = "en"

# Every reference must resolve: a missing page, anchor or term is a warning, and make docs
# turns warnings into errors.
nitpicky = True
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3           # [text](page.md#a-heading) links to headings up to ###
myst_links_external_new_tab = False

html_theme = "pydata_sphinx_theme"
html_title = "Nightjar ticket-desk lab"
html_static_path = ["_static"]
html_css_files = ["nightjar.css"]
html_last_updated_fmt = None
html_show_sourcelink = False
html_copy_source = False
html_theme_options = {
    # Nothing is fetched from the network: no icon links, no version switcher, no analytics.
    "icon_links": [],
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_depth": 3,
    "show_prev_next": True,
    "footer_start": ["copyright"],
    "footer_end": [],
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"index": []}
