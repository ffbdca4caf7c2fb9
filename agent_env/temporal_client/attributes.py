"""Search attributes that make runs findable: `temporal workflow list --query 'AgentEnvStatus="passed"'`."""

from temporalio.common import SearchAttributeKey

TASK_ID = SearchAttributeKey.for_keyword("AgentEnvTaskId")
TASK_VERSION = SearchAttributeKey.for_keyword("AgentEnvTaskVersion")
STATUS = SearchAttributeKey.for_keyword("AgentEnvStatus")
SCORE = SearchAttributeKey.for_float("AgentEnvScore")

ALL = (TASK_ID, TASK_VERSION, STATUS, SCORE)
