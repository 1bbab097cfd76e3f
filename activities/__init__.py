"""The side that does I/O: model providers and tools, each called as a Temporal activity."""

from activities.model_call import call_model
from activities.tools import registered_tools, tool, tool_activities, tool_specs

__all__ = ["call_model", "registered_tools", "tool", "tool_activities", "tool_specs"]
