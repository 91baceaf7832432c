"""Flux: regional capacity and traffic plans learned from RPC traces, executed through a ledger.

Stages (each a pure module; files, SQLite and the command line are adapters):
- ``service_model``: attribute sampled RPC calls to products, fit alpha[s, p] and residuals (eq. 1);
- ``plan_model`` / ``planner``: the joint capacity + traffic plan over regions x services x hardware x
  products x timesteps (objectives 2-7, constraints 8-15) solved with HiGHS;
- ``execution``: the three-phase execution DAG (upsize, shift, downsize);
- ``checker``: an independent check of every phase of every step (it does not import the planner);
- ``ledger``: the capacity ledger (SQLite) and the orchestrator that runs the DAG through it;
- ``handoff``: one region's targets as RAS reservations, spare pools as harvestable capacity.
"""

from placement_service.capacity import CapacityError


class FluxError(CapacityError):
    """Bad Flux input (traces, model, demand, supply, plan, ledger event) or an impossible request."""
