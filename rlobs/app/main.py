"""Entry script of the replay app (``streamlit run rlobs/app/main.py``; ``rlobs replay RUN`` does it for you).

Sets the page layout, builds the navigation (one module per page under ``views/``) and the sidebar.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from rlobs.app import state

if TYPE_CHECKING:
    from PIL import Image

VIEWS = Path(__file__).resolve().with_name("views")


def _icon() -> Image.Image:
    """A plain local favicon (served by the app itself): a Material or emoji icon, the page's or the app's, makes
    the browser fetch it from a public CDN (fonts.gstatic.com)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (32, 32), (31, 119, 180))
    draw = ImageDraw.Draw(img)
    draw.rectangle((8, 8, 11, 24), fill="white")  # an "r"
    draw.rectangle((8, 8, 22, 11), fill="white")
    return img


st.set_page_config(page_title="rlobs replay", page_icon=_icon(), layout="wide")

PAGES = [
    st.Page(VIEWS / "triage.py", title="Triage", icon=":material/medical_services:", url_path="triage", default=True),
    st.Page(VIEWS / "timeline.py", title="Timeline", icon=":material/timeline:", url_path="timeline"),
    st.Page(VIEWS / "weight_sync.py", title="Weight sync", icon=":material/sync:", url_path="weight_sync"),
    st.Page(VIEWS / "graders.py", title="Graders", icon=":material/rule:", url_path="graders"),
    st.Page(VIEWS / "samples.py", title="Samples", icon=":material/table_rows:", url_path="samples"),
    st.Page(VIEWS / "compare.py", title="Compare", icon=":material/compare:", url_path="compare"),
    st.Page(VIEWS / "runbook.py", title="Runbook", icon=":material/menu_book:", url_path="runbook", visibility="hidden"),
]

navigation = st.navigation(PAGES)
state.sidebar()
navigation.run()
