from mnemos.cli import main

main()
