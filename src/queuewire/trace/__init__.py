"""``queuewire.trace``: recorded traffic, imported from pcap and analysed at any scale.

(Design paragraph: see the modules; filled in as the package is built.)
"""
