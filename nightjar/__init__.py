"""Shared plumbing of the Nightjar ticket-desk lab.

The site, the Workstation tools (ticket-desk/) and the grader all import this
package, so each fact (configuration, schema, queue topology, message format)
lives in exactly one place.
"""
