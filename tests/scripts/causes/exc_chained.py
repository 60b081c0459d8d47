"""A chained Python exception in the user's code: a KeyError raised while handling json's error.

The traceback that ends the process is the second one; its innermost frame of the user's files is
``load_config`` in this file (json's own frames are the standard library's).
"""
import json


def load_config(text):
    try:
        return json.loads(text)
    except ValueError:
        settings = {}
        return settings["batch_size"]


def main():
    load_config("{not json")


if __name__ == "__main__":
    main()
