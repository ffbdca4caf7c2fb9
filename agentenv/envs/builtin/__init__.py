"""Built-in apps, by name. Each is an `agentenv.envs.App`; `APPS` maps names to their import targets."""

APPS = {
    "notes": "agentenv.envs.builtin.notes:Notes",
    "mail": "agentenv.envs.builtin.mail:Mail",
    "chat": "agentenv.envs.builtin.chat:Chat",
    "helpdesk": "agentenv.envs.builtin.helpdesk:Helpdesk",
    "billing": "agentenv.envs.builtin.billing:Billing",
    "payables": "agentenv.envs.builtin.payables:Payables",
}
