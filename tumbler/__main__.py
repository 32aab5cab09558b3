from .commands.main import entry_point

entry_point()
