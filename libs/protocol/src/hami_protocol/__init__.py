"""The wire contract shared by the services: keys, codecs, requests, vendors, config.

Pure: no I/O.
"""
