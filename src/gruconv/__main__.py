from gruconv.cli import run

run()
