from gruconv.entry import main

main()
