"""The lab harness: throwaway labs, the Workstation programs as real processes, their interruptions, private RabbitMQ nodes.

Used by the grader, the unit scripts (scenarios/), make local, make up and the
tests; the site and the Workstation programs never import it. This file
imports nothing, so `make up` can use siteprobe (standard library only)
without the lab's virtual environment.
"""
