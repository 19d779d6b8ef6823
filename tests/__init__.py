"""dcstudio tests: unit/ (mirrors the packages), peer/ (external oracles), golden/, replay/, gui/, bench/.

Every test folder is a package (has an ``__init__.py``) so that test modules with the same file name in
different folders do not clash, and so that a folder such as ``tests/unit/ir`` can never shadow ``ir``.
"""
