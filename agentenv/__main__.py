from agentenv.cli import main

main()
