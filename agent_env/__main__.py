from agent_env.cli import main

main()
