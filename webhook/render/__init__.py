"""The one flame-graph renderer: a profile (folded stacks and the run's metadata) in, one
self-contained HTML page out. The CLI's `flamegraph`, the offline `render` command and the
results page all draw with it. Pure: no Flask, no Kubernetes client, and of the project's modules
only webhook.stacks and webhook.wire.jsonio, which import none (tests/unit/test_layout.py).
"""

from webhook.render.model import Profile, named_share, read_meta, summary
from webhook.render.page import Page, render

__all__ = ["Page", "Profile", "named_share", "read_meta", "render", "summary"]
