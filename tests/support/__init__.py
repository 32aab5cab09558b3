"""What tests share that is not a fixture: helpers, fakes and fixture
trees, imported as ``support.NAME`` (tests/conftest.py's folder is on
sys.path for every test).  No test file imports another test file."""
