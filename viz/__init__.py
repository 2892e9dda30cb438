"""Pictures of the caches: DOT for the tree, a plotly grid for the blocks, narration, timelines.

Reads snapshots and events; never mutates a cache. The only streamlit import in this package is
the component wrapper in `viz/component`.
"""
