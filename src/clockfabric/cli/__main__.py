from clockfabric.cli.main import main

main()
