// Cursor paging shared by the tables that show "More": a refresh reads again as many rows
// as are shown (their statuses move), "More" reads the next page after them.

export const MAX_PAGE = 500;

export function pageParams({ more, pageSize, shown, cursor }) {
  return {
    limit: more ? pageSize : Math.min(MAX_PAGE, Math.max(pageSize, shown)),
    cursor: more ? cursor : undefined,
  };
}

export function shownText(count, nextCursor) {
  return `${count} shown${nextCursor ? ", more available" : ""}`;
}
