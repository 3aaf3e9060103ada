"""``braid bench claims``: Braid vs kernel TCP vs kernel MPTCP on the testbed.

``worker`` runs inside one testbed host (one process per host per run) and
speaks one of the three stacks; ``fabric`` brings up the testbed, the
daemons and MPTCP endpoints; ``rows`` defines each row of the matrix;
``metrics`` turns step times and 10 ms receive bins into the figures;
``report`` writes the JSON, the markdown and the PNGs.
"""
