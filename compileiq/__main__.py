from compileiq.cli import main

main()
