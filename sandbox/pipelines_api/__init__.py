"""The sandbox's Data Science Pipelines API server: KFP v2beta1 REST, as RHOAI's DSPA serves it
through its Route (the API server behind an auth proxy), for kfp.Client, the RHOAI pipeline UI's
calls and `kfp-ray submit|schedule|runs`.

wire.py       request and response bodies as kfp_server_api's models read and write them
listing.py    filters, sorting and page tokens of the list calls
store.py      pipelines, versions and experiments
server.py     the routes, errors in grpc-gateway's shape, and the auth proxy in front
"""
