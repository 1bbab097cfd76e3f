"""An app's own workflow and activity, in a module of their own as an app keeps them: the
sandbox imports a workflow's module afresh for each run (tests/test_plugin.py serves it beside
the agent)."""

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn
class ShoutWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(
            shout, text, start_to_close_timeout=timedelta(seconds=10)
        )
