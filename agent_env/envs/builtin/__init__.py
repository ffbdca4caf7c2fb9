"""Built-in apps, by name. Each is an `agent_env.envs.App`; `APPS` maps names to their import targets."""

APPS = {
    "notes": "agent_env.envs.builtin.notes:Notes",
    "mail": "agent_env.envs.builtin.mail:Mail",
    "chat": "agent_env.envs.builtin.chat:Chat",
    "helpdesk": "agent_env.envs.builtin.helpdesk:Helpdesk",
    "billing": "agent_env.envs.builtin.billing:Billing",
    "payables": "agent_env.envs.builtin.payables:Payables",
}
