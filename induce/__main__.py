"""``python -m induce``: the ``induce`` command (:func:`induce.cli.main.main`), for an environment whose PATH
lacks the console script."""
from induce.cli.main import main

if __name__ == "__main__":
    main()
