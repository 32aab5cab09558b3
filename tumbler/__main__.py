from .launch import entry_point

entry_point()
