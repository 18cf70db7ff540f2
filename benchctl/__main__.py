from benchctl.cli.main import main

main()
